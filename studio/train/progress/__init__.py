"""What a run reports while it trains: the step meter, the phase clock, events, the console and the step hold."""
