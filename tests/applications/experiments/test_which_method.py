"""``bbb reproduce which``: ties within the noise (paired over splits or seeds where the files give
them), the page written from the results' files, and the committed docs/which_method.md is what
the committed results give (``--check``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bbb.experiments.ties import same_score
from bbb.experiments.which import Benchmark, Score, Task, difference_se, load_benchmarks, render, winners
from testkit import run_main

ROOT = Path(__file__).resolve().parents[3]


def test_a_difference_inside_two_standard_errors_is_a_tie():
    t = Task("x", {"a": Score(1.0, 0.1), "b": Score(0.85, 0.05), "c": Score(0.5, 0.05)})
    assert winners(t, higher_is_better=True) == ["a", "b"]  # 0.15 < 2 * sqrt(0.1^2 + 0.05^2)
    assert winners(t, higher_is_better=False) == ["c"]


def test_paired_units_separate_what_independent_means_call_a_tie():
    """Two methods that move together over splits: their means' standard errors overlap, but one is
    better on every split, so the paired difference is a clear win."""
    a = {str(i): float(i) + 0.1 for i in range(10)}
    b = {str(i): float(i) for i in range(10)}
    sa, sb = Score(sum(a.values()) / 10, 0.9, a), Score(sum(b.values()) / 10, 0.9, b)
    assert difference_se(sa, sb) < 1e-9
    assert winners(Task("x", {"a": sa, "b": sb}), True) == ["a"]
    unpaired = Task("x", {"a": Score(sa.mean, 0.9), "b": Score(sb.mean, 0.9)})
    assert winners(unpaired, True) == ["a", "b"]


def test_a_method_without_spread_ties_only_on_an_equal_score():
    assert winners(Task("x", {"a": Score(1.5, None), "b": Score(1.4, None)}), False) == ["b"]
    assert winners(Task("x", {"a": Score(1.4, None), "b": Score(1.4, None)}), False) == ["a", "b"]


def test_scores_equal_but_for_a_sums_order_are_one_value_and_tie():
    """43/4800 summed in two orders (4e-17 apart, BBB's and IVON's UCI wine gap): one value, a tie."""
    a, b = 0.008958333333333327, 0.00895833333333329
    assert a != b and same_score(a, b) and not same_score(a, a * (1 + 1e-9))
    task = Task("gap", {"bbb": Score(a, None), "ivon": Score(b, None), "sgd": Score(0.012, None)})
    assert sorted(winners(task, higher_is_better=False)) == ["bbb", "ivon"]


def test_the_page_counts_wins_and_ties_and_names_the_cost():
    b = Benchmark("bench", "f.csv", "test NLL", False, "the seeds",
                  [Task("t1", {"x": Score(0.2, 0.01), "y": Score(0.5, 0.01)}),
                   Task("t2", {"x": Score(0.3, 0.1), "y": Score(0.31, 0.1)})], {"x": 10.0, "y": 2.0}, "minutes")
    text = render([b], "cmd")
    assert "| t1 | **0.200 +- 0.010** | 0.500 +- 0.010 | x |" in text
    assert "tie: x, y" in text and "| x | 1 of 2 | 1 of 2 | 10.0 |" in text
    assert "x, best on 2 of 2 tasks (1 alone, 1 tied)" in text and "5.0x the cheapest, y" in text


def test_a_shared_lead_is_named_as_such_and_the_cheapest_chosen_only_where_costs_are_known():
    tasks = [Task("t", {"x": Score(0.25, 0.01), "y": Score(0.25, 0.01), "z": Score(0.9, 0.01)})]
    text = render([Benchmark("b", "f.csv", "test NLL", False, "the seeds", tasks)], "cmd")
    assert "**No single choice here:** x, y share the lead, each best on 1 of 1 task (0 alone)" in text
    costed = render([Benchmark("b", "f.csv", "test NLL", False, "the seeds", tasks, {"x": 3.0, "y": 1.0, "z": 0.5},
                               "minutes")], "cmd")
    assert "**Choice here:** y, best on 1 of 1 task (0 alone, 1 tied); x as often, at a higher cost" in costed


def test_the_uncertainty_comparison_is_two_benchmarks_in_the_other_benchmarks_names(tmp_path):
    """results/uncertainty/comparison.csv (bbb compare's columns): calibration (lower is better)
    and OOD detection (higher), one run each, its methods named as UCI's and Fashion's are."""
    (tmp_path / "uncertainty").mkdir()
    (tmp_path / "uncertainty" / "comparison.csv").write_text(
        "method,test_error,nll,ece,brier,auroc_entropy,auroc_mi,auroc_max_prob,seconds\n"
        "bbb,1.9,0.063,0.35,0.030,0.89,0.88,0.89,50\n"
        "sgd,1.6,0.074,1.0,0.027,0.86,,0.86,20\n"
        '"ensemble of 5 runs (sgd x 5)",1.6,0.057,0.7,0.024,0.87,0.88,0.87,100\n')
    calib, ood = load_benchmarks(tmp_path)
    assert not calib.higher_is_better and ood.higher_is_better
    nll = next(t for t in calib.tasks if t.name == "test NLL")
    assert set(nll.scores) == {"bbb", "sgd", "deep_ensemble"} and winners(nll, False) == ["deep_ensemble"]
    mi = next(t for t in ood.tasks if "mutual information" in t.name)
    assert set(mi.scores) == {"bbb", "deep_ensemble"}  # one network: no mutual information
    assert calib.cost == {"bbb": 50.0, "sgd": 20.0, "deep_ensemble": 100.0}


def test_your_data_reads_each_seed_and_each_ensemble(tmp_path):
    """results/your-data (ensembles.py's files): one network per method (mean over the seeds,
    paired over them) and each method's ensemble of 5 (one value), a classifier's NLL as minus its
    log-likelihood."""
    d = tmp_path / "your-data"
    d.mkdir()
    (d / "ensembles.csv").write_text(
        "table,method,members,n_test,score,members_mean,members_best,members_worst,ensemble,fit,members_mean_fit,"
        "ensemble_fit\n"
        "yacht,bbb,2,31,RMSE,1,1,1,1,log-likelihood,-1.1,-1.0\n"
        "yacht,sgd,2,31,RMSE,1,1,1,1,log-likelihood,-0.5,-0.2\n"
        "mush,sgd,2,813,error,0.02,0.02,0.02,0.02,NLL,0.09,0.08\n")
    (d / "members.csv").write_text(
        "table,method,seed,score,fit\nyacht,bbb,0,1,-1.0\nyacht,bbb,1,1,-1.2\nyacht,sgd,0,1,-0.4\n"
        "yacht,sgd,1,1,-0.6\nmush,sgd,0,0.02,0.1\nmush,sgd,1,0.02,0.08\n")
    b = next(x for x in load_benchmarks(tmp_path) if x.source.startswith("results/your-data"))
    assert b.higher_is_better
    yacht = next(t for t in b.tasks if t.name == "yacht")
    assert set(yacht.scores) == {"bbb", "sgd", "bbb_ensemble", "deep_ensemble"}
    assert yacht.scores["bbb"].mean == pytest.approx(-1.1) and yacht.scores["bbb"].units == {"0": -1.0, "1": -1.2}
    assert yacht.scores["deep_ensemble"].mean == -0.2 and yacht.scores["deep_ensemble"].se is None
    assert winners(yacht, True)[0] == "deep_ensemble"
    mush = next(t for t in b.tasks if t.name == "mush")
    assert mush.scores["sgd"].mean == pytest.approx(-0.09) and mush.scores["deep_ensemble"].mean == -0.08


def test_your_data_calibration_is_a_benchmark_of_its_own_in_points(tmp_path):
    """The same files' calibration columns (a regression's interval gap, a classifier's ECE) as a
    lower-is-better benchmark in points, per seed and per ensemble; without them, none."""
    d = tmp_path / "your-data"
    d.mkdir()
    (d / "ensembles.csv").write_text(
        "table,method,members,n_test,score,members_mean,members_best,members_worst,ensemble,fit,members_mean_fit,"
        "ensemble_fit,calibration,members_mean_calibration,ensemble_calibration\n"
        "yacht,bbb,2,31,RMSE,1,1,1,1,log-likelihood,-1.1,-1.0,interval gap,0.2,0.25\n"
        "yacht,sgd,2,31,RMSE,1,1,1,1,log-likelihood,-0.5,-0.2,interval gap,0.05,0.1\n")
    (d / "members.csv").write_text(
        "table,method,seed,score,fit,calibration\nyacht,bbb,0,1,-1.0,0.19\nyacht,bbb,1,1,-1.2,0.21\n"
        "yacht,sgd,0,1,-0.4,0.04\nyacht,sgd,1,1,-0.6,0.06\n")
    b = next(x for x in load_benchmarks(tmp_path) if x.name.endswith(": calibration"))
    assert not b.higher_is_better and "interval gap" in b.score and "ECE" in b.score
    (yacht,) = b.tasks
    assert yacht.scores["bbb"].mean == pytest.approx(20.0) and yacht.scores["bbb"].units == pytest.approx(
        {"0": 19.0, "1": 21.0})
    assert yacht.scores["deep_ensemble"].mean == pytest.approx(10.0) and yacht.scores["deep_ensemble"].se is None
    assert winners(yacht, b.higher_is_better) == ["sgd"]  # 15 points below bbb on both seeds
    log_likelihood = next(x for x in load_benchmarks(tmp_path) if x.source.startswith("results/your-data"))
    assert log_likelihood.higher_is_better and log_likelihood.tasks[0].scores["bbb"].mean == pytest.approx(-1.1)


def test_your_data_rows_from_elsewhere_are_a_benchmark_of_the_epistemic_sd(tmp_path):
    """results/your-data/ood.py's files: each method's epistemic-sd AUROC per seed (one
    deterministic network has none: sgd only as its ensemble) and each ensemble's one value."""
    d = tmp_path / "your-data"
    d.mkdir()
    (d / "ood.csv").write_text(
        "table,column,above,n_in,n_out,method,members_mean_sd,members_sd_sd,ensemble_sd,members_mean_epistemic_sd,"
        "members_sd_epistemic_sd,ensemble_epistemic_sd\n"
        "yacht,froude,0.4,26,44,bbb,0.9,0.1,0.95,0.8,0.1,0.99\nyacht,froude,0.4,26,44,sgd,0.9,0.1,0.9,,,0.97\n")
    (d / "ood_members.csv").write_text(
        "table,method,seed,n_in,n_out,auroc_sd,auroc_epistemic_sd\nyacht,bbb,0,26,44,0.9,0.7\n"
        "yacht,bbb,1,26,44,0.9,0.9\nyacht,sgd,0,26,44,0.9,\nyacht,sgd,1,26,44,0.9,\n")
    b = next(x for x in load_benchmarks(tmp_path) if x.source.startswith("results/your-data/ood.csv"))
    assert b.higher_is_better and "epistemic sd" in b.score
    (yacht,) = b.tasks
    assert set(yacht.scores) == {"bbb", "bbb_ensemble", "deep_ensemble"}
    assert yacht.scores["bbb"].mean == pytest.approx(0.8) and yacht.scores["bbb"].units == {"0": 0.7, "1": 0.9}
    assert yacht.scores["bbb_ensemble"].mean == 0.99 and winners(yacht, True)[0] == "bbb_ensemble"


def test_the_committed_page_is_what_the_committed_results_give(capsys):
    """docs/which_method.md is written by the command, never by hand: regenerate it
    (`bbb reproduce which`) whenever results/ changes."""
    code, out, _ = run_main(capsys, "reproduce", "which", "--results", str(ROOT / "results"), "--check",
                            str(ROOT / "docs" / "which_method.md"))
    assert code == 0, out
    assert {b.source.split("/")[1] for b in load_benchmarks(ROOT / "results")} >= {"uci", "lora", "mnist", "fashion"}


def test_no_results_folder_is_one_line(capsys, tmp_path):
    code, _, err = run_main(capsys, "reproduce", "which", "--results", str(tmp_path / "none"))
    assert code != 0 and "no results folder" in err and len(err.strip().splitlines()) == 1
    assert err.count("bbb reproduce which") == 1  # (the prefix once, as every error line has it)


def test_options_it_would_ignore_are_not_offered(capsys, tmp_path):
    """It trains nothing: --threads and --no-compile (which every training command takes) would be
    accepted and change nothing; they are unknown options, --quiet is kept."""
    for extra in (("--threads", "2"), ("--no-compile",)):
        code, _, err = run_main(capsys, "reproduce", "which", "--results", str(tmp_path / "none"), *extra)
        assert code == 2 and "unrecognized arguments" in err and extra[0] in err, err
    code, _, err = run_main(capsys, "reproduce", "which", "--results", str(tmp_path / "none"), "--quiet")
    assert code != 0 and "no results folder" in err


def test_the_bbb_ensembles_cost_includes_the_bbb_run_it_is_chosen_from(tmp_path):
    """It trains at BBB's validation choice: without BBB's run it has no setting, so its cost is
    both runs', not its own networks' alone."""
    uci = tmp_path / "uci"
    uci.mkdir()
    head = "method,dataset,n_splits,rmse_mean,rmse_se,ll_mean,ll_se,seconds\n"
    rows = ["bbb,yacht,20,0.8,0.06,-0.3,0.07,600", "bbb_ensemble,yacht,20,0.6,0.05,0.2,0.05,120",
            "laplace,yacht,20,0.7,0.05,-1.7,0.25,60"]
    (uci / "methods.csv").write_text(head + "\n".join(rows) + "\n")
    (uci / "splits.csv").write_text("method,dataset,split,ll\n")
    b = next(x for x in load_benchmarks(tmp_path) if x.source == "results/uci/methods.csv")
    assert b.cost == {"bbb": 10.0, "bbb_ensemble": 12.0, "laplace": 1.0}
    assert "includes bbb's" in render([b], "cmd")


def test_the_uci_intervals_are_a_benchmark_of_their_own_paired_by_split(tmp_path):
    """Each method's calibration gap (methods.csv, in points), paired over the splits by each
    split's term of the gap from splits.csv: two methods a split apart in the same direction are a
    win, where their independent standard errors would call it a tie; a file without the gap
    (before the column existed) gives no such benchmark."""
    uci = tmp_path / "uci"
    uci.mkdir()
    cov = {"bbb": [(0.45, 0.85, 0.90), (0.43, 0.83, 0.88)], "ivon": [(0.49, 0.89, 0.94), (0.47, 0.87, 0.92)]}
    split_lines = ["method,dataset,split,ll,coverage_50,coverage_90,coverage_95"]
    rows = []
    for m, splits in cov.items():
        split_lines += [f"{m},yacht,{i},0.0,{a},{b},{c}" for i, (a, b, c) in enumerate(splits)]
        mean = [sum(x) / 2 for x in zip(*splits)]
        gap = sum(abs(c - v) for c, v in zip(mean, (0.5, 0.9, 0.95))) / 3
        rows.append(f"{m},yacht,2,0.8,0.06,-0.3,0.07,60,{mean[0]},{mean[1]},{mean[2]},{gap},0.03")
    head = "method,dataset,n_splits,rmse_mean,rmse_se,ll_mean,ll_se,seconds,coverage_50,coverage_90,coverage_95,"
    (uci / "methods.csv").write_text(head + "calibration_gap,calibration_gap_se\n" + "\n".join(rows) + "\n")
    (uci / "splits.csv").write_text("\n".join(split_lines) + "\n")
    b = next(x for x in load_benchmarks(tmp_path) if x.name.startswith("UCI regression: do the intervals"))
    assert not b.higher_is_better and b.cost == {"bbb": 1.0, "ivon": 1.0}
    (task,) = b.tasks
    assert task.scores["bbb"].mean == pytest.approx(6.0) and task.scores["ivon"].mean == pytest.approx(2.0)
    assert task.scores["bbb"].units == pytest.approx({"0": 5.0, "1": 7.0})  # their mean is the gap
    assert winners(task, b.higher_is_better) == ["ivon"]  # 4 points on both splits: paired, a win
    unpaired = Task("yacht", {m: Score(v.mean, v.se) for m, v in task.scores.items()})
    assert winners(unpaired, b.higher_is_better) == ["ivon", "bbb"]  # their standard errors alone: a tie
    old = [",".join(r.split(",")[:11]) for r in rows]
    (uci / "methods.csv").write_text(head.rstrip(",") + "\n" + "\n".join(old) + "\n")
    assert not any(x.name.startswith("UCI regression: do the intervals") for x in load_benchmarks(tmp_path))


def test_the_lora_cost_sums_every_job_once_and_laplace_carries_maps_validation(tmp_path):
    """seeds.csv: each test job's seconds, and on the seed whose validation chose the setting that
    job's seconds; a method's cost is the sum (each validation job once); the Laplace trains at
    map's choice, so map's validation is part of its cost."""
    run = tmp_path / "lora" / "second-run"
    run.mkdir(parents=True)
    (run / "methods.csv").write_text("arch,task,shots,method,nll,nll_se\n" + "\n".join(
        f"cnn,digits,5,{m},{v},0.1" for m, v in (("map", 1.0), ("laplace", 0.9), ("bbb_a", 0.8))) + "\n")
    lines = ["arch,task,shots,method,seed,nll,seconds,validation_seconds"]
    for m, test, val in (("map", 60, 120), ("laplace", 30, None), ("bbb_a", 90, 600)):
        for seed in range(3):
            lines.append(f"cnn,digits,5,{m},{seed},1.0,{test},{val if (val and seed == 0) else ''}")
    (run / "seeds.csv").write_text("\n".join(lines) + "\n")
    b = next(x for x in load_benchmarks(tmp_path) if "LoRA" in x.name)
    assert b.cost == {"map": 5.0, "laplace": 3.5, "bbb_a": 14.5}
    assert "laplace's includes map's validation" in render([b], "cmd")
    assert not any(x.name.endswith(": calibration") for x in load_benchmarks(tmp_path))  # no ECE in these files


def test_the_lora_ece_is_a_benchmark_of_its_own_paired_by_seed(tmp_path):
    run = tmp_path / "lora" / "second-run"
    run.mkdir(parents=True)
    (run / "methods.csv").write_text("arch,task,shots,method,nll,nll_se,ece,ece_se\n"
                                     "cnn,digits,5,map,1.0,0.1,0.12,0.05\ncnn,digits,5,bbb_a,0.8,0.1,0.04,0.05\n")
    (run / "seeds.csv").write_text("arch,task,shots,method,seed,nll,ece,seconds\n" + "\n".join(
        f"cnn,digits,5,{m},{seed},1.0,{e + 0.02 * seed},60" for m, e in (("map", 0.1), ("bbb_a", 0.02))
        for seed in range(3)) + "\n")
    nll, ece = (next(x for x in load_benchmarks(tmp_path) if x.name.endswith(end)) for end in ("50)", ": calibration"))
    assert ece.score == "test ECE" and not ece.higher_is_better and ece.cost == nll.cost == {"map": 3.0, "bbb_a": 3.0}
    (task,) = ece.tasks
    assert task.scores["bbb_a"].mean == 0.04 and task.scores["bbb_a"].units == pytest.approx(
        {"0": 0.02, "1": 0.04, "2": 0.06})
    assert winners(task, False) == ["bbb_a"]  # 0.08 below map's on every seed: paired, a win (unpaired, a tie)
    assert winners(Task("t", {m: Score(v.mean, v.se) for m, v in task.scores.items()}), False) == ["bbb_a", "map"]


def test_a_run_trained_in_a_population_costs_its_share_of_the_populations_time(tmp_path):
    """table1.csv's ``population`` (bbb reproduce mnist --population): the reported run's seconds is
    its population's wall time, shared by K runs, so the run costs a K-th of it."""
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist" / "table1.csv").write_text(
        "method,hidden,test_error,test_error_sd,n_seeds,seconds,status,population\n"
        "sgd,400,1.7,,1,60,ok,\nbbb_mixture,400,1.9,,1,180,ok,3\n")
    (mnist,) = [b for b in load_benchmarks(tmp_path) if b.name.startswith("MNIST")]
    assert mnist.cost == {"sgd": 1.0, "bbb_mixture": 1.0}
    assert "a run trained in a population of K, its K-th" in mnist.cost_unit


def test_a_benchmark_without_costs_has_no_empty_cost_column():
    """The counts' table of a benchmark whose files give no cost had an empty header cell and an
    empty delimiter cell (``|---|---:|---:||``): Markdown renders no table from that."""
    b = Benchmark("bench", "f.csv", "test NLL", False, "the seeds",
                  [Task("t", {"x": Score(0.2, 0.01), "y": Score(0.5, 0.01)})])
    text = render([b], "cmd")
    assert "| method | best alone | tied for best |\n|---|---:|---:|\n| x | 1 of 1 | 0 of 1 |\n" in text
    assert "||" not in text


def test_the_page_says_how_each_standard_error_was_computed():
    """The UCI tables' errors are population sd / sqrt(n) (the published columns' convention), the
    others sample sd / sqrt(n); the page said "standard error" for both."""
    text = render(load_benchmarks(ROOT / "results"), "cmd")
    assert "over the splits: population sd / sqrt(n), as the published UCI tables" in text
    assert "over the seeds (sample sd / sqrt(n))" in text
    assert "one with no spread ties one with a standard error within 2 of that error" in text


def test_the_uci_readmes_tables_have_every_dataset_at_its_committed_numbers():
    """results/uci/README.md's log-likelihood table stopped after power-plant: protein, wine and
    yacht, three of the 9 datasets its text counts over, were not in it."""
    import csv

    with open(ROOT / "results" / "uci" / "methods.csv", newline="") as f:
        rows = {(r["method"], r["dataset"]): r for r in csv.DictReader(f)}
    text = (ROOT / "results" / "uci" / "README.md").read_text()
    for title, metric in (("### Test RMSE", "rmse"), ("### Test log-likelihood", "ll")):
        table = text.split(title)[1].split("\n\n")[1].splitlines()[2:]
        assert sorted(line.split(" (n=")[0].strip("| ") for line in table) == sorted({d for _, d in rows})
        for line in table:
            cells = [c.strip().replace("**", "") for c in line.strip("|").split("|")]
            dataset = cells[0].split(" (n=")[0]
            for method, cell in zip(("bbb", "mc_dropout", "deep_ensemble"), cells[1:4]):
                mean, se = (x.strip() for x in cell.split("+-"))
                d = len(mean.split(".")[1])
                r = rows[(method, dataset)]
                assert (mean, se) == (f"{float(r[metric + '_mean']):.{d}f}", f"{float(r[metric + '_se']):.{d}f}")


def test_a_laplace_cost_says_it_holds_its_networks_training():
    """MNIST's and results/uncertainty's Laplace seconds are its SGD network's training plus the fit
    (table1.md, results/uncertainty/README.md); the cost column said only 'minutes of one run'."""
    text = render(load_benchmarks(ROOT / "results"), "cmd")
    assert text.count("laplace's its SGD network's training and its fit") == 3  # MNIST, uncertainty x 2


def test_the_fashion_benchmark_reads_its_newest_run_by_the_date_in_the_folders_name(tmp_path):
    """The run folders are named by their kind and date: sorted by name, run-2026-11-28 came after a
    newer gpu-2026-12-01, and the page showed the older run's numbers."""
    for name, nll in (("run-2026-11-28", "0.30"), ("gpu-2026-12-01", "0.20")):
        folder = tmp_path / "fashion" / name
        folder.mkdir(parents=True)
        (folder / "methods.csv").write_text(f"method,nll,nll_se\nbbb,{nll},0.01\n")
    (fashion,) = load_benchmarks(tmp_path)
    assert fashion.source == "results/fashion/gpu-2026-12-01/methods.csv"
    assert fashion.tasks[0].scores["bbb"].mean == 0.20


def test_the_help_names_the_page_a_path_not_a_folder():
    """``--out`` writes one Markdown file; --help called it ``--out DIR``."""
    import argparse

    from bbb.experiments.which import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert "--out PATH" in parser.format_help() and "--out DIR" not in parser.format_help()
