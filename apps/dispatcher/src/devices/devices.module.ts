import { Module } from '@nestjs/common';
import { PgService, TrustStore, sqlOf } from '@app/common';
import { AnnouncePolicy } from './announce-policy.service';
import { CoolingOff } from './cooling-off.service';
import { DeviceAnnounces } from './device-announces.service';
import { DeviceAuth } from './device-auth.service';
import { DeviceGateway } from './device.gateway';
import { DeviceHandshake } from './device-handshake.service';
import { DeviceRegistry } from './device-registry.service';
import { DeviceServing } from './device-serving.service';
import { DeviceStates } from './device-states.service';
import { DeviceStrikes } from './device-strikes.service';
import { DeviceHealth } from './device-health';
import { DeviceMetrics } from './device-metrics';
import { HandshakeFailures } from './handshake-failures.service';
import { PolicyRefresh } from './policy-refresh.service';
import { PresenceService } from './presence.service';
import { UsageAudit } from './usage-audit.service';

/**
 * Devices: the socket.io gateway, who is connected and what each announced, presence. It reports to
 * one listener (the dispatch module) through the DeviceListener interface and knows nothing of tasks.
 */
@Module({
  providers: [
    DeviceRegistry,
    DeviceStates,
    DeviceAuth,
    HandshakeFailures,
    CoolingOff,
    DeviceHandshake,
    DeviceStrikes,
    AnnouncePolicy,
    DeviceServing,
    DeviceAnnounces,
    PresenceService,
    PolicyRefresh,
    DeviceGateway,
    DeviceMetrics,
    DeviceHealth,
    UsageAudit,
    // The one writer of trust (libs/common), on the dispatcher's pool: the policy, the usage audit, the canaries.
    { provide: TrustStore, useFactory: (db: PgService) => new TrustStore(sqlOf(db.pool)), inject: [PgService] },
  ],
  exports: [DeviceRegistry, DeviceGateway, DeviceStates, UsageAudit, PolicyRefresh, TrustStore],
})
export class DevicesModule {}
