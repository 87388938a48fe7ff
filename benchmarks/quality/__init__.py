"""The quality benchmark (`curateevo bench quality`): does evolved curation beat no curation,
beyond noise? Rows and cells (rows.py, cells.py), statistics (stats.py), report (table.py)."""
