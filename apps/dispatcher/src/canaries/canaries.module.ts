import { Module } from '@nestjs/common';
import { DevicesModule } from '../devices/devices.module';
import { DispatchModule } from '../dispatch/dispatch.module';
import { CanarySender } from './canary-sender.service';

/**
 * Canaries: prompts with a known answer sent to network devices, whose answers decide their trust.
 * Depends on devices (who is connected, their policy) and dispatch (borrowing an idle device, and
 * hearing its events); nothing depends on it.
 */
@Module({
  imports: [DevicesModule, DispatchModule],
  providers: [CanarySender],
})
export class CanariesModule {}
