"""Configuration: Tier A (`crewlet.yaml`, one node's bootstrap file) and the company document
(`company.yaml`, Tier B, hot-reloadable). DESIGN.md, "Configuration"; seed 002, "Deployment".

Both are YAML whose `${VAR}` references expand before decoding (`expand.py`); every
refusal names its field path, and all of a document's refusals are reported together
(`ConfigError.problems`). Advisories are what a valid document carries as a consequence.
"""
from engine.config.company import (
    AGENT_ID_NAMESPACE,
    Company,
    Seat,
    load_company,
    parse_company,
)
from engine.config.company_rules import company_advisories
from engine.config.errors import ConfigError, ConfigFileError, ConfigInvalid
from engine.config.node import NodeConfig, load_node_config, parse_node_config
from engine.config.node_rules import node_advisories

__all__ = [
    "AGENT_ID_NAMESPACE",
    "Company",
    "ConfigError",
    "ConfigFileError",
    "ConfigInvalid",
    "NodeConfig",
    "Seat",
    "company_advisories",
    "load_company",
    "load_node_config",
    "node_advisories",
    "parse_company",
    "parse_node_config",
]
