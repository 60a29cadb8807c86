"""Entry script for spark-submit (which runs a .py file, not `-m`): the report CLI with absolute imports.

    python -m spark_analysis bundle --out wanbed-analysis.zip
    spark-submit --master spark://HOST:7077 --py-files wanbed-analysis.zip \\
        spark_analysis/submit_entry.py report DIR --out OUT
"""
import sys

from spark_analysis.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
