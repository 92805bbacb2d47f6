"""Teams: yours, their members and invitations."""
