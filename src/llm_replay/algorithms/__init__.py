"""Advantage estimators and policy losses."""
