"""PySpark jobs: pcap and node-metrics ingestion, strategy comparisons, the HTML report."""
