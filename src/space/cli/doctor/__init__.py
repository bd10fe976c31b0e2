"""`space doctor`: whether this host can run SPACE. `checks.py` holds one check per
need and runs them, `boot.py` the boot-speed probe only `space doctor` adds,
`findings.py` what both return."""
