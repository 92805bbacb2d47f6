"""Elastic groups: replicas of one image behind one endpoint, scaled by rules.

- ``models``: groups, their scaling rules, their events and load samples.
- ``specs``: a group's spec from JSON, YAML or the article's HCL, checked and normalised.
- ``services``: apply a spec, and everything that changes a group (each with an event).
- ``autoscaler``: the decision, a pure function of the group, its replicas and its load.
- ``tasks``: the periodic control job that decides and acts.
"""
