"""The lab: simulated statements with known truth, for the tests and the benchmarks alike.

`fleet` draws whole analyses of unchanged, stepped and drifting statements (the null calibration, the detection-quality
lab); `surges` draws targets for the call-surge test (the surge lab); `synthetic` turns a query's means per scrape into
cumulative counters. The lab may import the engine; nothing in the package imports the lab.
"""
