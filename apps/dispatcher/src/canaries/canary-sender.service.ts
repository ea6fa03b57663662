import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { APP_CONFIG, LOGGER, PgService, TrustStore, taskAddress } from '@app/common';
import type { AppConfig, CanaryRow, ChatParams, Logger } from '@app/common';
import { DeviceRegistry } from '../devices/device-registry.service';
import type { DeviceSession } from '../devices/device-session';
import { PolicyRefresh } from '../devices/policy-refresh.service';
import { DeviceLoans } from '../dispatch/device-loans';
import { DispatcherMetrics } from '../infra/dispatcher-metrics.service';
import { OutputTracker } from '../relay/output-tracker';
import { CanaryRun } from './canary-run';
import type { CanaryOutcome } from './canary-run';
import { answersCanary, canaryDelay } from './canary-check';

/** The longest between two looks at which devices are due (shorter when the interval is). */
const MAX_TICK_MS = 1_000;
/** A device on probation whose canary got no answer is sent another after about this long. */
const PROBATION_RETRY_MS = 30_000;
/** How much of a failed canary's answer its reason quotes. */
const QUOTED_CHARS = 60;

type Canary = Omit<CanaryRow, 'created_at'>;

/**
 * Canary prompts (docs/operations.md, "Canaries"): a prompt with a known answer, registered per model,
 * sent to this dispatcher's network devices that serve the model. A device on probation gets one as
 * soon as it is free, and no organization's task before it passed one; every other device one per
 * CANARY_INTERVAL_MS (jittered), only while it is idle and no job waits for it (DeviceLoans). A canary
 * is an ordinary task:assign at temperature 0 with a fresh task address and request id; it has no job,
 * no task record, no usage. The answer decides (TrustStore.canary): as registered, the device is
 * trusted; otherwise quarantined, and this dispatcher takes its models at once. A canary that gets no
 * answer (a refusal, an error, silence, a disconnect) proves nothing either way.
 */
@Injectable()
export class CanarySender implements OnModuleInit, OnModuleDestroy {
  private timer: NodeJS.Timeout | null = null;
  /** When each device is due its next canary. */
  private readonly due = new WeakMap<DeviceSession, number>();
  /** Devices with a canary under way (from the choice of a canary to its verdict). */
  private readonly sending = new Set<DeviceSession>();

  constructor(
    private readonly registry: DeviceRegistry,
    private readonly loans: DeviceLoans,
    private readonly refresh: PolicyRefresh,
    private readonly db: PgService,
    private readonly trust: TrustStore,
    private readonly metrics: DispatcherMetrics,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    const tick = Math.min(MAX_TICK_MS, Math.max(10, Math.floor(this.config.CANARY_INTERVAL_MS / 4)));
    this.timer = setInterval(() => this.tick(), tick);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    if (this.timer) {
      clearInterval(this.timer);
    }
  }

  private tick(): void {
    const now = Date.now();
    for (const session of this.registry.all()) {
      if (session.socket.data.orgId !== null || !session.running || this.sending.has(session)) {
        continue;
      }
      let due = this.due.get(session);
      if (due === undefined) {
        // A device on probation at once; any other after an interval, so that a fleet that connects
        // together is not canaried together.
        due = session.held ? now : now + canaryDelay(this.config.CANARY_INTERVAL_MS);
        this.due.set(session, due);
      }
      if (now >= due) {
        void this.send(session).catch((err: unknown) =>
          this.logger.warn(
            { err: (err as Error).message, deviceId: session.id },
            'canary failed to run; retrying later',
          ),
        );
      }
    }
  }

  private async send(session: DeviceSession): Promise<void> {
    if (!this.loans.free(session)) {
      // Busy, or a job waits for it: it is due still, and looked at again at the next tick.
      return;
    }
    this.sending.add(session);
    let outcome: CanaryOutcome | null = null;
    try {
      let canary: Canary | null;
      try {
        canary = await this.pick(session.models);
      } catch (err) {
        // Postgres unreachable: not again at every tick.
        this.schedule(session, Math.min(PROBATION_RETRY_MS, this.config.CANARY_INTERVAL_MS));
        throw err;
      }
      if (!canary) {
        // None of its models has canaries (any more): nothing to send until the next interval.
        this.schedule(session, this.config.CANARY_INTERVAL_MS);
        return;
      }
      const params: ChatParams = { messages: canary.messages, max_tokens: canary.max_tokens, temperature: 0 };
      const run = new CanaryRun(this.config.TASK_IDLE_TIMEOUT_MS);
      const address = taskAddress('network', randomUUID());
      const loan = await this.loans.lend(session, address, OutputTracker.forRequest(params), run);
      if (!loan) {
        // Busy, or a job waits for it: it is due still, and tried again at the next look.
        return;
      }
      run.onSilence(() => this.loans.giveBack(loan));
      session.request(
        'task:assign',
        { task_address: address, model: canary.model_id, attempt: 1, params, request_id: randomUUID() },
        this.config.ASSIGN_ACK_TIMEOUT_MS,
        (answer) => {
          if (!answer.ok || answer.answer.accepted !== true) {
            this.loans.giveBack(loan);
            run.end({ kind: 'no_answer', why: answer.ok ? 'refused' : answer.reason });
          }
        },
      );
      outcome = await run.outcome;
      await this.judge(session, canary, outcome);
    } finally {
      this.sending.delete(session);
      if (outcome) {
        const retry = session.held && outcome.kind !== 'answered';
        this.schedule(
          session,
          retry ? Math.min(PROBATION_RETRY_MS, this.config.CANARY_INTERVAL_MS) : this.config.CANARY_INTERVAL_MS,
        );
      }
    }
  }

  private schedule(session: DeviceSession, interval: number): void {
    this.due.set(session, Date.now() + canaryDelay(interval));
  }

  /** One of the canaries of the models, at random; null when none of them has any. */
  private async pick(models: readonly string[]): Promise<Canary | null> {
    if (models.length === 0) {
      return null;
    }
    const { rows } = await this.db.sql<Canary>(
      `SELECT id, model_id, messages, max_tokens, expect FROM canaries
       WHERE model_id = ANY($1::text[]) ORDER BY random() LIMIT 1`,
      [models],
    );
    return rows[0] ?? null;
  }

  private async judge(session: DeviceSession, canary: Canary, outcome: CanaryOutcome): Promise<void> {
    if (outcome.kind !== 'answered') {
      this.metrics.canaries.inc({ result: 'inconclusive' });
      this.logger.info(
        { deviceId: session.id, model: canary.model_id, canary: canary.id, why: outcome.why },
        'canary got no answer: proves nothing',
      );
      return;
    }
    const passed = answersCanary(canary.expect, outcome.text);
    this.metrics.canaries.inc({ result: passed ? 'passed' : 'failed' });
    const quoted = JSON.stringify(outcome.text.slice(0, QUOTED_CHARS));
    const reason = passed
      ? `answered a canary of ${canary.model_id} as registered`
      : `answered canary ${canary.id} of ${canary.model_id} otherwise than registered: ${quoted}`;
    const verdict = await this.trust.canary(session.id, passed, reason);
    if (!verdict) {
      return;
    }
    if (!passed) {
      this.logger.warn(
        { deviceId: session.id, model: canary.model_id, canary: canary.id, answer: quoted },
        'canary failed',
      );
    }
    if (verdict.changed) {
      if (verdict.state === 'quarantined') {
        this.metrics.quarantined.inc({ cause: 'canary' });
      }
      this.logger.warn({ deviceId: session.id, trust: verdict.state, reason }, 'device trust changed by a canary');
      await this.refresh.recheck(session);
    }
  }
}
