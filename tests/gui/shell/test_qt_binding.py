"""The Qt binding keeps reference counts right when C++ calls our item models many times.

PySide6 6.12.0 lost a reference to None on each such call and the process died after
a few thousand calls (a 10,000-image grid crashed). pyproject.toml excludes it.
"""

from __future__ import annotations

import os
import subprocess
import sys

from fixtures.waits import scaled_s

SCRIPT = """
from PySide6.QtCore import QAbstractListModel, QModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtWidgets import QApplication
app = QApplication([])
class Model(QAbstractListModel):
    def rowCount(self, parent=QModelIndex()):
        return 10000
    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        return None
proxy = QSortFilterProxyModel()
model = Model()
proxy.setSourceModel(model)
for i in range(30000):
    proxy.data(proxy.index(i % 10000, 0), Qt.ItemDataRole.ToolTipRole)
print("survived")
"""


def test_item_model_returning_none_thirty_thousand_times_survives() -> None:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=scaled_s(120))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "survived"
