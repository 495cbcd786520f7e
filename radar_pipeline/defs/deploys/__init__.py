"""Deploys: the `deploys` partitions, deploy_verdicts, its sensor and the nightly reanalysis."""
