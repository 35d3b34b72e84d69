"""Embedders, language models and rerankers.

- onnx_embedder.py: the packaged, offline MiniLM embedder on onnxruntime (with its int8
  helpers onnx_matmul.py and onnx_rewrite.py)
- openai_embedder.py, openai_llm.py: any OpenAI-compatible endpoint
- bedrock.py: Bedrock embeddings, chat (Converse) and rerank
"""

__all__ = [
    "bedrock",
    "onnx_embedder",
    "onnx_matmul",
    "onnx_rewrite",
    "openai_embedder",
    "openai_llm",
]
