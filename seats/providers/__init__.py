"""Model providers for the turn engine (DESIGN.md, deliberate difference 4): the contract
(`base`), the deterministic offline kind (`scripted`), any OpenAI-compatible endpoint
(`openai`), Anthropic's Messages API (`anthropic`), the retry rules the remote kinds share
(`retries`), their SDK clients (`clients`), and the fallback chain over
`company.providers.llm` (`chain`)."""
from seats.providers.anthropic import AnthropicProvider
from seats.providers.base import KINDS, Completion, Message, Provider, ProviderError, ToolCall, ToolSpec
from seats.providers.chain import Answer, ChainEmpty, ChainExhausted, ProviderChain, members_for
from seats.providers.clients import Clients
from seats.providers.openai import OpenAIProvider
from seats.providers.scripted import ScriptedProvider, approx_tokens

__all__ = [
    "KINDS", "AnthropicProvider", "Answer", "ChainEmpty", "ChainExhausted", "Clients", "Completion", "Message",
    "OpenAIProvider", "Provider", "ProviderChain", "ProviderError", "ScriptedProvider", "ToolCall", "ToolSpec",
    "approx_tokens", "members_for",
]
