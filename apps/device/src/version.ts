/** Announced to the dispatcher as `agent_version`; bump with every release of the agent. */
export const AGENT_VERSION = '0.1.0';
