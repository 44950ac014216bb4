"""One board per system configuration of the paper, by its CLI name."""

from components.boards.base import TrainingBoard
from components.boards.cxl import CxlBBoard, CxlBoard, CxlDBoard
from components.boards.host import DramBoard, PmemBoard, SsdBoard
from components.boards.pcie import PcieBoard

BOARDS: dict[str, type[TrainingBoard]] = {
    board.system: board
    for board in (SsdBoard, PmemBoard, PcieBoard, CxlDBoard, CxlBBoard, CxlBoard, DramBoard)
}


def build_board(system: str) -> TrainingBoard:
    if system not in BOARDS:
        raise ValueError(f"unknown system {system!r}; one of {', '.join(BOARDS)}")
    return BOARDS[system]()
