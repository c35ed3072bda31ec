"""The machinery of `loadtest/run`: processes, bodies, peers, checks,
measurements and the report. Standard library only, but for matplotlib
(charts)."""
