"""Make yacht.csv (UCI yacht hydrodynamics) and mushroom.csv (UCI Mushroom) in the current folder
from $BBB_DATA/uci/yacht/data.txt and $BBB_DATA/mushroom/agaricus-lepiota.data, with named
columns: the tables of results/your-data/README.md; and boston.csv, concrete.csv, energy.csv,
wine.csv and kin8nm.csv from $BBB_DATA/uci (those of results/your-data/ensembles.py).

Usage: BBB_DATA=... python results/your-data/make_csvs.py
"""

from __future__ import annotations

import csv
import os

from bbb.data import MUSHROOM_ATTRIBUTES

YACHT = ["longitudinal_position", "prismatic_coefficient", "length_displacement", "beam_draught", "length_beam",
         "froude_number", "resistance"]


#: the other UCI tables: folder -> (file stem, column names, the target last)
TABLES = {
    "bostonHousing": ("boston", ["crim", "zn", "indus", "chas", "nox", "rm", "age", "dis", "rad", "tax", "ptratio",
                                 "b", "lstat", "medv"]),
    "concrete": ("concrete", ["cement", "slag", "ash", "water", "superplasticizer", "coarse", "fine", "age",
                              "strength"]),
    "energy": ("energy", ["compactness", "surface", "wall", "roof", "height", "orientation", "glazing",
                          "glazing_distribution", "heating_load"]),
    "wine-quality-red": ("wine", ["fixed_acidity", "volatile_acidity", "citric_acid", "residual_sugar", "chlorides",
                                  "free_sulfur_dioxide", "total_sulfur_dioxide", "density", "ph", "sulphates",
                                  "alcohol", "quality"]),
    "kin8nm": ("kin8nm", [f"theta{i}" for i in range(1, 9)] + ["y"]),
}


def main() -> None:
    root = os.environ["BBB_DATA"]
    for folder, (stem, columns) in TABLES.items():
        with open(f"{root}/uci/{folder}/data.txt") as f, open(f"{stem}.csv", "w", newline="") as out:
            rows = [line.split() for line in f if line.strip()]
            if any(len(r) != len(columns) for r in rows):
                raise SystemExit(f"{folder}: a row without {len(columns)} columns")
            csv.writer(out).writerows([columns] + rows)
    with open(f"{root}/uci/yacht/data.txt") as f, open("yacht.csv", "w", newline="") as out:
        csv.writer(out).writerows([YACHT] + [line.split() for line in f if line.strip()])
    with open(f"{root}/mushroom/agaricus-lepiota.data") as f, open("mushroom.csv", "w", newline="") as out:
        csv.writer(out).writerows([["edible", *MUSHROOM_ATTRIBUTES]]
                                  + [line.strip().split(",") for line in f if line.strip()])


if __name__ == "__main__":
    main()
