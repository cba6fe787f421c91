"""Offline tiny models for the demo and the tests: a tokenizer, a Llama model, a trainer."""
