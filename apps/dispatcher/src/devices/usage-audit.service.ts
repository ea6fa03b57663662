import { Inject, Injectable } from '@nestjs/common';
import { LOGGER, TrustStore } from '@app/common';
import type { Logger } from '@app/common';
import { DispatcherMetrics } from '../infra/dispatcher-metrics.service';
import type { DeviceSession } from './device-session';
import { PolicyRefresh } from './policy-refresh.service';
import { USAGE_DISAGREEMENTS, USAGE_WINDOW, UsageWindow, usageDisagrees } from './usage-window';

/**
 * Judges a network device's usage reports against the output the relay passed on (usageDisagrees),
 * over its last USAGE_WINDOW completed tasks on this dispatcher: USAGE_DISAGREEMENTS that claim tokens
 * nobody received quarantine the device (its trust in Postgres, so every dispatcher follows), and this
 * dispatcher takes its models from it at once. A device that reconnects elsewhere starts a new window;
 * a quarantined one stays quarantined until an operator trusts it again. Direct devices are their
 * organization's own and never judged.
 */
@Injectable()
export class UsageAudit {
  private readonly windows = new WeakMap<DeviceSession, UsageWindow>();

  constructor(
    private readonly trust: TrustStore,
    private readonly refresh: PolicyRefresh,
    private readonly metrics: DispatcherMetrics,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /** A task of the device completed with this report (null: none) after `relayedBytes` of output in `choices` choices. */
  completed(
    session: DeviceSession,
    reportedCompletionTokens: number | null,
    relayedBytes: number,
    choices: number,
  ): void {
    if (session.socket.data.orgId !== null || reportedCompletionTokens === null) {
      return;
    }
    let window = this.windows.get(session);
    if (!window) {
      window = new UsageWindow();
      this.windows.set(session, window);
    }
    const disagreements = window.add(usageDisagrees(reportedCompletionTokens, relayedBytes, choices));
    if (disagreements === USAGE_DISAGREEMENTS) {
      void this.quarantine(session).catch((err: unknown) =>
        this.logger.error({ err: (err as Error).message, deviceId: session.id }, 'could not quarantine a device'),
      );
    }
  }

  private async quarantine(session: DeviceSession): Promise<void> {
    const reason = `its usage reports claimed tokens beyond the output relayed in ${USAGE_DISAGREEMENTS} of its last ${USAGE_WINDOW} tasks`;
    if (!(await this.trust.quarantine(session.id, reason))) {
      return;
    }
    this.metrics.quarantined.inc({ cause: 'usage' });
    this.logger.warn({ deviceId: session.id, reason }, 'device quarantined');
    await this.refresh.recheck(session);
  }
}
