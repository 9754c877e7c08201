"""Reports: render a Store and its Findings as HTML, JSON and terminal text. Reports never diagnose."""
