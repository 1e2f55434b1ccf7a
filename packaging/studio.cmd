@echo off
rem Double-click launcher for Windows: sets up on first start, then opens the studio.
cd /d "%~dp0\.."
py dev.py run %*
