@echo off
rem Double-click launcher for Windows: sets up on first start, then opens the studio.
rem The window stays open when something fails, so the message can be read.
cd /d "%~dp0\.."
set "STUDIO_PY="
for %%V in (3.13 3.12 3.11) do (
    if not defined STUDIO_PY (
        py -%%V -c "import sys" >nul 2>&1 && set "STUDIO_PY=py -%%V"
    )
)
if not defined STUDIO_PY (
    echo The studio needs Python 3.11, 3.12 or 3.13, and none was found.
    echo Install one from https://www.python.org/downloads/windows/ ^(tick "Add python.exe to PATH"^),
    echo then double-click this file again.
    pause
    exit /b 1
)
%STUDIO_PY% dev.py run %*
if errorlevel 1 (
    echo.
    echo The studio stopped with an error ^(see above^).
    pause
    exit /b 1
)
