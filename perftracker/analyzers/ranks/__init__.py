"""Views for runs of many ranks: which ranks are many, rank groups, the ranks worth showing, spreads across ranks."""
