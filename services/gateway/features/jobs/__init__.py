"""The jobs feature: the queue the scheduler publishes, and changes of a job's resources."""
