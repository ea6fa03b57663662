import { io } from 'socket.io-client';
import { DEVICE_NAMESPACE, HANDSHAKE_ERRORS, PROTOCOL_VERSION } from '@app/common/protocol/device-protocol';
import type { AnnounceAck, RefusalReason } from '@app/common/protocol/device-protocol';
import type { Backend } from '../backends/backend';
import type { ModelMapping } from '../backends';
import type { DeviceOptions } from '../options';
import { announcePayload } from '../link/announced-identities';
import { AGENT_VERSION } from '../version';

/** How long each check waits for an answer. */
const CHECK_TIMEOUT_MS = 5_000;

/** What to do about each refusal of a model, for the device's owner. */
const REFUSAL_ADVICE: Record<RefusalReason, string> = {
  unknown_model:
    'the network has no model of this name: ask its operator to add it, or serve it under the catalog name (--model <catalog-id>=<runtime-name>)',
  not_network: 'the operator keeps this model off network devices',
  not_enabled: 'the organization of this device does not have this model enabled: ask its operator',
  not_allowed: 'the operator restricted this device to other models (device models <id>)',
  digest_mismatch: 'the operator pinned other weights for this model: pull the ones the operator names',
  digest_unknown: 'the operator pinned the weights of this model and this runtime reports none (only Ollama does)',
  quarantined: 'the operator quarantined this device: ask why (device show <id>)',
};

interface Line {
  ok: boolean;
  text: string;
}

/**
 * `switchyard-device doctor <options>`: checks, in order, what the device needs to serve, one line
 * each, with what to do when a check fails: every dispatcher reachable; the token accepted (a real
 * handshake) and the protocol version spoken; the runtime reachable; the models found and how each maps
 * to a catalog id; which of them the dispatcher would let it serve (a dry-run announce: nothing is
 * served, the device's state stays as it was); the features declared. Returns the exit code: 0 when the
 * device would serve at least one model.
 */
export async function doctor(options: DeviceOptions, backend: Backend, print: (line: string) => void): Promise<number> {
  const say = ({ ok, text }: Line) => print(`${ok ? 'ok  ' : 'FAIL'} ${text}`);
  let reachable: string | null = null;
  for (const server of options.servers) {
    const line = await checkReachable(server);
    say(line);
    reachable ??= line.ok ? server : null;
  }
  if (!reachable) {
    return 1;
  }
  const socket = io(`${reachable}${DEVICE_NAMESPACE}`, {
    transports: ['websocket'],
    auth: { token: options.token, protocol: PROTOCOL_VERSION },
    forceNew: true,
    reconnection: false,
    timeout: CHECK_TIMEOUT_MS,
  });
  try {
    const handshake = await new Promise<Error | null>((resolve) => {
      socket.once('connect', () => resolve(null));
      socket.once('connect_error', (error: Error) => resolve(error));
    });
    if (handshake) {
      handshakeLines(reachable, handshake.message).forEach(say);
      return 1;
    }
    say({ ok: true, text: `token: accepted by ${reachable}` });
    say({ ok: true, text: `protocol: version ${PROTOCOL_VERSION} (agent ${AGENT_VERSION})` });

    await backend.start(() => undefined);
    const runtime = options.backend.name === 'sim' ? 'sim (built in)' : options.backend.options.upstream;
    if (!backend.available()) {
      say({ ok: false, text: `runtime ${runtime}: unreachable: start it, or check --upstream (and --api-key)` });
      return 1;
    }
    say({ ok: true, text: `runtime ${runtime}: reachable` });
    const models = backend.models();
    if (models.length === 0) {
      say({
        ok: false,
        text: 'models: the runtime lists none: pull one (ollama pull <model>), or name them with --model',
      });
      return 1;
    }
    const mappings: readonly ModelMapping[] = options.backend.name === 'sim' ? [] : options.backend.options.models;
    const payload = { ...announcePayload(backend, { available: true, runningTask: null }).payload, dry_run: true };
    let ack: AnnounceAck;
    try {
      ack = (await socket.timeout(CHECK_TIMEOUT_MS).emitWithAck('announce', payload)) as AnnounceAck;
    } catch {
      say({ ok: false, text: `announce: ${reachable} did not answer within ${CHECK_TIMEOUT_MS / 1000} s` });
      return 1;
    }
    if (!ack.ok) {
      say({ ok: false, text: `announce: refused: ${ack.error}` });
      return 1;
    }
    const features = payload.features.length ? payload.features.join(', ') : 'none';
    for (const model of models) {
      const upstream = mappings.find((m) => m.public === model)?.upstream ?? model;
      const named = upstream === model ? model : `${model} (runtime: ${upstream})`;
      const refusal = ack.refused.find((r) => r.model === model);
      say(
        refusal
          ? { ok: false, text: `model ${named}: refused (${refusal.reason}): ${REFUSAL_ADVICE[refusal.reason]}` }
          : { ok: true, text: `model ${named}: would be served (${ack.pool} pool); features: ${features}` },
      );
    }
    return ack.models.length > 0 ? 0 : 1;
  } finally {
    backend.stop();
    socket.disconnect();
  }
}

async function checkReachable(server: string): Promise<Line> {
  try {
    const res = await fetch(`${server}/healthz`, { signal: AbortSignal.timeout(CHECK_TIMEOUT_MS) });
    if (res.ok) {
      return { ok: true, text: `dispatcher ${server}: reachable` };
    }
    return {
      ok: false,
      text: `dispatcher ${server}: answers ${res.status} on /healthz: is this a Switchyard dispatcher?`,
    };
  } catch (error) {
    const cause = (error as { cause?: { code?: string } }).cause?.code ?? (error as Error).name;
    return {
      ok: false,
      text: `dispatcher ${server}: unreachable (${cause}): check --server, and that this machine may reach its port`,
    };
  }
}

/** The lines for a refused handshake: the token's, or the protocol's. */
function handshakeLines(server: string, message: string): Line[] {
  if (message === HANDSHAKE_ERRORS.token) {
    return [
      {
        ok: false,
        text: `token: refused by ${server}: not a device token of this network, or revoked: ask its operator for one`,
      },
    ];
  }
  if (message.startsWith(HANDSHAKE_ERRORS.protocol)) {
    // Refused before its token was looked at.
    return [
      {
        ok: false,
        text: `protocol: ${message}, this agent ${PROTOCOL_VERSION}: install the agent version the operator names`,
      },
    ];
  }
  if (message.startsWith(HANDSHAKE_ERRORS.coolingOff)) {
    return [
      {
        ok: false,
        text: `token: ${server} asks this device to wait (${message}): it was disconnected for invalid events`,
      },
    ];
  }
  if (message === HANDSHAKE_ERRORS.tooManyFailures) {
    return [{ ok: false, text: `token: ${server} refuses this address for now: too many failed handshakes from it` }];
  }
  return [{ ok: false, text: `token: no handshake with ${server} (${message})` }];
}
