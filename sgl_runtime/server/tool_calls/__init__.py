"""Tool calling over the OpenAI API: per-model call formats (SGLang's parser names), parsing
calls out of generated text (whole and streamed), and the constraint that makes them valid."""

from sgl_runtime.server.tool_calls.formats import FORMATS, ToolCallFormat, detect_format, get_format

__all__ = ["FORMATS", "ToolCallFormat", "detect_format", "get_format"]
