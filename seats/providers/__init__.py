"""Model providers for the turn engine (DESIGN.md, deliberate difference 4): the contract
(`base`), the deterministic offline kind (`scripted`), any OpenAI-compatible endpoint
(`openai`), and the fallback chain over `company.providers.llm` (`chain`)."""
from seats.providers.base import KINDS, Completion, Message, Provider, ProviderError
from seats.providers.chain import Answer, ChainEmpty, ChainExhausted, ProviderChain, members_for
from seats.providers.openai import OpenAIProvider
from seats.providers.scripted import ScriptedProvider, approx_tokens

__all__ = [
    "KINDS", "Answer", "ChainEmpty", "ChainExhausted", "Completion", "Message", "OpenAIProvider",
    "Provider", "ProviderChain", "ProviderError", "ScriptedProvider", "approx_tokens", "members_for",
]
