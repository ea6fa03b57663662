import { CommanderError } from 'commander';
import type { Command } from 'commander';
import { looksLikeDeviceToken } from '@app/common/keys/keys';
import type { Feature } from '@app/common/protocol/chat';
import type { BackendConfig, ModelMapping } from './backends';
import { UPSTREAM_DEFAULTS } from './backends';
import { UPSTREAM_FLAGS, buildProgram } from './args/program';
import type { RawOptions, LOG_LEVELS } from './args/program';
import { readTokenFile, TOKEN_ON_COMMAND_LINE_WARNING } from './args/token-source';
import type { TokenSource } from './args/token-source';
import { MAX_MODELS, parseModelMapping } from './args/value-parsers';

export { LOG_LEVELS } from './args/program';
export { parseModelMapping } from './args/value-parsers';

/** The agent's configuration, parsed and validated once at start. */
export interface DeviceOptions {
  /** Every dispatcher the device may connect to: base URLs without a trailing slash, in the order given. */
  servers: string[];
  /** The first of {@link servers}, for an agent that connects to one dispatcher. */
  server: string;
  token: string;
  backend: BackendConfig;
  logLevel: (typeof LOG_LEVELS)[number];
  logContent: boolean;
}

export type ParseResult = { ok: true; options: DeviceOptions } | { ok: false; exitCode: number };

/** Usage errors exit 2, as most command-line tools do, so scripts can tell them from a refused token (1). */
export const USAGE_EXIT_CODE = 2;

const withFeature = (list: Feature[], feature: Feature, add: boolean): Feature[] =>
  add && !list.includes(feature) ? [...list, feature] : list;

/**
 * Parses the command line (and SWITCHYARD_SERVER / SWITCHYARD_DEVICE_TOKEN). On a usage error commander
 * has already written one `error: ...` line to stderr; help and version exit 0.
 */
export function parseArgs(
  argv: string[],
  output?: { writeOut(s: string): void; writeErr(s: string): void },
): ParseResult {
  // Typed explicitly so that TypeScript knows program.error() does not return.
  const program: Command = buildProgram();
  if (output) {
    program.configureOutput(output);
  }
  try {
    program.parse(argv);
    const raw = program.opts<RawOptions>();
    const warn = (s: string) => (output ? output.writeErr(s) : void process.stderr.write(s));
    const token = tokenOf(program, raw, warn);
    const models = [...new Set(raw.model ?? [])];
    if (models.length > MAX_MODELS) {
      program.error(`error: at most ${MAX_MODELS} --model options`);
    }
    // Only flags on the command line are mistakes; an environment variable may be set for another backend.
    const given = (prefix: string) =>
      program.options.find(
        (o) => o.long?.startsWith(prefix) && program.getOptionValueSource(o.attributeName()) === 'cli',
      );
    const common = {
      servers: raw.server,
      server: raw.server[0],
      token,
      logLevel: raw.logLevel,
      logContent: raw.logContent,
    };
    if (raw.backend === 'sim') {
      const upstreamFlag = UPSTREAM_FLAGS.map((flag) => given(flag)).find((o) => o !== undefined);
      if (upstreamFlag) {
        program.error(`error: ${upstreamFlag.long} applies only to --backend ollama and openai`);
      }
      if (models.length === 0) {
        program.error('error: --backend sim needs at least one --model <id> to serve');
      }
      return {
        ok: true,
        options: {
          ...common,
          backend: {
            name: 'sim',
            options: {
              models,
              ttftMs: raw.simTtftMs,
              tokensPerSecond: raw.simTokensPerSecond,
              tokens: raw.simTokens,
              features: withFeature(raw.simFeatures, 'web_search', raw.webSearch),
              embeddingDimensions: raw.simEmbeddingDimensions,
            },
          },
        },
      };
    }
    const simFlag = given('--sim-');
    if (simFlag) {
      program.error(`error: ${simFlag.long} applies only to --backend sim`);
    }
    const upstream = raw.upstream ?? (raw.backend === 'ollama' ? UPSTREAM_DEFAULTS.ollamaUrl : undefined);
    if (!upstream) {
      program.error(
        "error: --backend openai needs --upstream <url>, the server's base URL such as http://127.0.0.1:8000/v1",
      );
    }
    const mappings: ModelMapping[] = [];
    for (const value of models) {
      let mapping: ModelMapping;
      try {
        mapping = parseModelMapping(value);
      } catch (error) {
        program.error(`error: option '--model <id>' argument is invalid. ${(error as Error).message}`);
      }
      const other = mappings.find((m) => m.public === mapping.public);
      if (other) {
        program.error(
          `error: --model ${mapping.public} is mapped twice (to ${other.upstream} and ${mapping.upstream})`,
        );
      }
      mappings.push(mapping);
    }
    return {
      ok: true,
      options: {
        ...common,
        backend: {
          name: raw.backend,
          options: {
            upstream,
            models: mappings,
            ...(raw.apiKey ? { apiKey: raw.apiKey } : {}),
            ...(raw.features ? { features: withFeature(raw.features, 'web_search', raw.webSearch) } : {}),
            ...(raw.webSearch ? { webSearch: true } : {}),
            discoveryIntervalMs: raw.discoveryIntervalMs,
            healthIntervalMs: raw.healthIntervalMs,
          },
        },
      },
    };
  } catch (error) {
    if (error instanceof CommanderError) {
      return { ok: false, exitCode: error.exitCode === 0 ? 0 : USAGE_EXIT_CODE };
    }
    throw error;
  }
}

/**
 * The device token: from SWITCHYARD_DEVICE_TOKEN, --token-file or --token (one of them; --token warns,
 * since other users see a command line). Never echoed: a mistyped token is still close to a secret.
 */
function tokenOf(program: Command, raw: RawOptions, writeErr: (s: string) => void): string {
  const fromCli = program.getOptionValueSource('token') === 'cli';
  if (raw.tokenFile !== undefined && fromCli) {
    program.error('error: give the token once: --token or --token-file');
  }
  let token: string;
  let source: TokenSource;
  if (raw.tokenFile !== undefined) {
    try {
      token = readTokenFile(raw.tokenFile);
    } catch (error) {
      program.error(`error: ${(error as Error).message}`);
    }
    source = '--token-file';
  } else if (raw.token !== undefined) {
    token = raw.token;
    source = fromCli ? '--token' : 'SWITCHYARD_DEVICE_TOKEN';
  } else {
    program.error('error: no device token: set SWITCHYARD_DEVICE_TOKEN, or give --token-file <path> (or --token)');
  }
  if (!looksLikeDeviceToken(token)) {
    program.error(`error: ${source} must hold a device token: syd_ followed by 32 to 128 letters and digits`);
  }
  if (source === '--token') {
    writeErr(TOKEN_ON_COMMAND_LINE_WARNING);
  }
  return token;
}
