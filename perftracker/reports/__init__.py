"""Reports: render the report tables (the analyzers' views) and the findings as HTML, JSON and terminal text.

Reports never diagnose and never compute a view: they select, format and lay out.
"""
