import { Global, Module } from '@nestjs/common';
import { MetricsService } from './metrics.service';

/** The api's metrics; their scrape route is with the other operations routes (health/metrics.controller.ts). */
@Global()
@Module({ providers: [MetricsService], exports: [MetricsService] })
export class MetricsModule {}
