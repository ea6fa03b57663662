import { InvalidArgumentError } from 'commander';
import type { Feature } from '@app/common/protocol/chat';
import { FEATURES } from '@app/common/protocol/chat';
import type { ModelMapping } from '../backends';

/**
 * The parsers of the agent's option values: each checks one value as commander hands it over and
 * throws InvalidArgumentError with a message for the person typing it.
 */

/** The announce schema bounds model ids to 200 characters and 1000 per device. */
export const MAX_MODEL_ID = 200;
export const MAX_MODELS = 1000;
/** More dispatchers than this is a typo or a loop in a script, not a deployment. */
export const MAX_SERVERS = 16;

export const nonNegativeInt = (value: string) => {
  if (!/^[0-9]+$/.test(value) || Number(value) > 3_600_000) {
    throw new InvalidArgumentError('must be a whole number from 0 to 3600000');
  }
  return Number(value);
};

export const positiveInt = (max: number) => (value: string) => {
  if (!/^[1-9][0-9]*$/.test(value) || Number(value) > max) {
    throw new InvalidArgumentError(`must be a whole number from 1 to ${max}`);
  }
  return Number(value);
};

export const tokensPerSecond = (value: string) => {
  const n = Number(value);
  if (!/^[0-9]+(\.[0-9]+)?$/.test(value) || n > 1_000_000) {
    throw new InvalidArgumentError('must be a number from 0 to 1000000 (0 = no delay between tokens)');
  }
  return n;
};

export const features = (value: string): Feature[] => {
  const names = value
    .split(',')
    .map((f) => f.trim())
    .filter((f) => f.length > 0 && f !== 'none');
  for (const name of names) {
    if (!(FEATURES as readonly string[]).includes(name)) {
      throw new InvalidArgumentError(`unknown feature "${name}"; known: ${FEATURES.join(', ')} (or none)`);
    }
  }
  return [...new Set(names)] as Feature[];
};

export const collectModel = (value: string, previous: string[] | undefined) => {
  if (value.trim() !== value || value.length === 0 || value.length > MAX_MODEL_ID) {
    throw new InvalidArgumentError(`must be a model id of 1 to ${MAX_MODEL_ID} characters without surrounding spaces`);
  }
  return [...(previous ?? []), value];
};

/** Discovery and health intervals: at least 100 ms (tests go fast), at most an hour. */
export const intervalMs = (value: string) => {
  if (!/^[0-9]+$/.test(value) || Number(value) < 100 || Number(value) > 3_600_000) {
    throw new InvalidArgumentError('must be a whole number of milliseconds from 100 to 3600000');
  }
  return Number(value);
};

/** A runtime's base URL, kept with its path (an OpenAI-compatible server's usually ends in /v1). */
export const upstreamUrl = (value: string) => {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError('must be a URL such as http://127.0.0.1:11434 or http://127.0.0.1:8000/v1');
  }
  if (!['http:', 'https:'].includes(url.protocol)) {
    throw new InvalidArgumentError('must start with http:// or https://');
  }
  if (url.search || url.hash) {
    throw new InvalidArgumentError('must not have a query string or fragment');
  }
  return url.href.replace(/\/+$/, '');
};

/**
 * `--model <public-id>=<upstream-name>` for the runtimes: the catalog's name on the left, the
 * runtime's on the right (split at the first `=`); a plain `--model x` is the same name on both sides.
 */
export function parseModelMapping(value: string): ModelMapping {
  const at = value.indexOf('=');
  const mapping =
    at < 0 ? { public: value, upstream: value } : { public: value.slice(0, at), upstream: value.slice(at + 1) };
  for (const [side, name] of [
    ['public id', mapping.public],
    ['upstream name', mapping.upstream],
  ] as const) {
    if (name.trim() !== name || name.length === 0 || name.length > MAX_MODEL_ID) {
      throw new InvalidArgumentError(
        `"${value}": the ${side} must be 1 to ${MAX_MODEL_ID} characters without surrounding spaces`,
      );
    }
  }
  return mapping;
}

/** socket.io takes the URL's path as the namespace, so only a bare origin is accepted and `/devices` is added by the agent. */
export const serverUrl = (value: string) => {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError('must be a URL such as http://127.0.0.1:8081');
  }
  if (!['http:', 'https:', 'ws:', 'wss:'].includes(url.protocol)) {
    throw new InvalidArgumentError('must start with http://, https://, ws:// or wss://');
  }
  if ((url.pathname !== '/' && url.pathname !== '') || url.search || url.hash) {
    throw new InvalidArgumentError("must be the dispatcher's base URL without a path, such as http://127.0.0.1:8081");
  }
  return url.origin;
};

/**
 * `--server` is repeatable, and SWITCHYARD_SERVER may list several URLs separated by commas (an
 * origin has no comma): every dispatcher the device may connect to, in order, without repeats.
 */
export const collectServers = (value: string, previous: string[] | undefined) => {
  const urls = value
    .split(',')
    .map((v) => v.trim())
    .filter((v) => v.length > 0);
  if (urls.length === 0) {
    throw new InvalidArgumentError('must be a URL such as http://127.0.0.1:8081');
  }
  const servers = [...new Set([...(previous ?? []), ...urls.map(serverUrl)])];
  if (servers.length > MAX_SERVERS) {
    throw new InvalidArgumentError(`at most ${MAX_SERVERS} dispatchers`);
  }
  return servers;
};
