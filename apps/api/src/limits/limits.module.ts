import { Module } from '@nestjs/common';
import { MetricsModule } from '../metrics/metrics.module';
import { LimitsService } from './limits.service';

@Module({ imports: [MetricsModule], providers: [LimitsService], exports: [LimitsService] })
export class LimitsModule {}
