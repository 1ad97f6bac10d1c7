"""Make yacht.csv (UCI yacht hydrodynamics) and mushroom.csv (UCI Mushroom) in the current folder
from $BBB_DATA/uci/yacht/data.txt and $BBB_DATA/mushroom/agaricus-lepiota.data, with named
columns: the tables of results/your-data/README.md.

Usage: BBB_DATA=... python results/your-data/make_csvs.py
"""

from __future__ import annotations

import csv
import os

from bbb.data import MUSHROOM_ATTRIBUTES

YACHT = ["longitudinal_position", "prismatic_coefficient", "length_displacement", "beam_draught", "length_beam",
         "froude_number", "resistance"]


def main() -> None:
    root = os.environ["BBB_DATA"]
    with open(f"{root}/uci/yacht/data.txt") as f, open("yacht.csv", "w", newline="") as out:
        csv.writer(out).writerows([YACHT] + [line.split() for line in f if line.strip()])
    with open(f"{root}/mushroom/agaricus-lepiota.data") as f, open("mushroom.csv", "w", newline="") as out:
        csv.writer(out).writerows([["edible", *MUSHROOM_ATTRIBUTES]]
                                  + [line.strip().split(",") for line in f if line.strip()])


if __name__ == "__main__":
    main()
