import type { Socket } from 'socket.io';
import type { z } from 'zod';
import { NETWORK_POOL, dialectOf, queueName, schemaProblem } from '@app/common';
import type {
  AckOf,
  AckedEvent,
  DeviceSocketData,
  DeviceToServerEvents,
  Feature,
  MessageOf,
  ModelIdentity,
  ProtocolDialect,
  ServerToDeviceCatalog,
  ServerToDeviceEvent,
  ServerToDeviceEvents,
} from '@app/common';
import { AnnounceRate } from './announce-rate';

export type DeviceSocket = Socket<DeviceToServerEvents, ServerToDeviceEvents, Record<string, never>, DeviceSocketData>;

/** The device's answer to an acknowledged event, read into the current shape; or none in time, or one that fails its schema. */
export type DeviceAnswer<T> =
  | { readonly ok: true; readonly answer: T }
  | { readonly ok: false; readonly reason: 'no_answer' }
  | { readonly ok: false; readonly reason: 'malformed'; readonly problem: string };

type UnackedEvent = Exclude<ServerToDeviceEvent, AckedEvent<ServerToDeviceCatalog>>;
type AckedServerEvent = AckedEvent<ServerToDeviceCatalog>;
/** socket.io's emit without its event map: a message is written in the device's version, not the current one. */
type WireEmit = (event: string, ...args: unknown[]) => boolean;

/**
 * A connected, authenticated device: what it is and what it said it serves. Facts about the
 * connection only; what the device is working on belongs to the dispatch module.
 */
export class DeviceSession {
  /** The models the device last announced, whether or not it may serve them all. */
  announcedModels: readonly string[] = [];
  /** What its runtime said each of those models is, by model (a model it said nothing of is absent). */
  identities: ReadonlyMap<string, ModelIdentity> = new Map();
  /** The models the device announced and may serve, and their queues (in the same order). */
  private served: { models: string[]; queues: string[] } = { models: [], queues: [] };
  features: ReadonlySet<Feature> = new Set();
  /** The device says its runtime can take tasks. */
  available = false;
  /**
   * On probation with a model that has canaries: given no task until it answers one (the canaries
   * module sends it). Its announce was accepted all the same: nothing tells it that it waits.
   */
  held = false;
  /** It has announced itself at least once. */
  announced = false;
  /** Invalid, foreign or over-budget events in the current window, and when the window began. */
  invalidEvents = 0;
  firstStrikeAt = 0;
  /** Disconnected for its misdeeds (DeviceStrikes): counted once, however many more arrive before the close. */
  struckOut = false;
  /** Its allowance of announces. */
  readonly announces = new AnnounceRate();

  /** The protocol version the device speaks (its handshake's), and how to speak it. */
  readonly dialect: ProtocolDialect;

  constructor(readonly socket: DeviceSocket) {
    const dialect = dialectOf(socket.data.protocol);
    if (!dialect) {
      // The handshake refuses any other version: this would be a bug of the dispatcher's.
      throw new Error(`a session of unserved protocol version ${socket.data.protocol}`);
    }
    this.dialect = dialect;
  }

  /** Sends an event, written in the device's protocol version. */
  send<K extends UnackedEvent>(event: K, message: MessageOf<ServerToDeviceCatalog, K>): void {
    (this.socket.emit as WireEmit)(event, this.dialect.toDevice.messages[event](message));
  }

  /**
   * Sends an acknowledged event, written in the device's version; `answered` gets the device's answer
   * once it passed that version's schema, or why there is none (nothing within `timeoutMs`, or an
   * answer that fails its schema: the device is not trusted with its answers either).
   */
  request<K extends AckedServerEvent>(
    event: K,
    message: MessageOf<ServerToDeviceCatalog, K>,
    timeoutMs: number,
    answered: (answer: DeviceAnswer<AckOf<ServerToDeviceCatalog, K>>) => void,
  ): void {
    const schema: z.ZodType<AckOf<ServerToDeviceCatalog, K>> = this.dialect.toDevice.answers[event];
    const wire = this.dialect.toDevice.messages[event](message);
    (this.socket.timeout(timeoutMs).emit as WireEmit)(event, wire, (err: Error | null, raw: unknown) => {
      if (err) {
        answered({ ok: false, reason: 'no_answer' });
        return;
      }
      const parsed = schema.safeParse(raw);
      if (parsed.success) {
        answered({ ok: true, answer: parsed.data });
        return;
      }
      answered({ ok: false, reason: 'malformed', problem: schemaProblem(parsed.error) });
    });
  }

  get id(): string {
    return this.socket.data.deviceId;
  }

  /** `network`, or the id of the organization that owns the device. */
  get pool(): string {
    return this.socket.data.orgId ?? NETWORK_POOL;
  }

  get models(): readonly string[] {
    return this.served.models;
  }

  /** The queues the device takes jobs from. */
  get queues(): readonly string[] {
    return this.served.queues;
  }

  serve(models: readonly string[], features: readonly Feature[], available: boolean, held = false): void {
    this.served = { models: [...models], queues: models.map((m) => queueName(m, this.pool)) };
    this.features = new Set(features);
    this.available = available;
    this.held = held;
    this.announced = true;
  }

  /** The digest the device announced for a model; null when it announced none. */
  digestOf(model: string): string | null {
    return this.identities.get(model)?.digest ?? null;
  }

  supports(required: readonly Feature[]): boolean {
    return required.every((f) => this.features.has(f));
  }

  /** Connected, announced, and its runtime up: it could run a task (a canary, while it is held). */
  get running(): boolean {
    return this.announced && this.available && this.socket.connected;
  }

  /** Ready to be given tasks (whether it has one is the dispatch module's business). */
  get ready(): boolean {
    return this.running && !this.held;
  }
}
