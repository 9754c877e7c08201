"""The watcher of `--watch`: step series, the online rules asked through the seam, incidents."""
