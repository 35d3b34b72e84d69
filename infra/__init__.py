"""CDK app that deploys Skald serverless on AWS (see app.py for the entry point)."""
