"""Any OpenAI-compatible chat server as a policy (`openai:BASE_URL`): vLLM, SGLang, TGI,
`transformers serve`, hosted endpoints.

Importing this package imports nothing heavy; `policy.py` imports the `openai` client.
"""
