"""Notifications: webhook endpoints and their deliveries, notifications sent, preferences."""
