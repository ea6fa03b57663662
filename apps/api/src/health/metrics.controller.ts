import { Controller, Get, Header } from '@nestjs/common';
import { Public } from '../auth/access.decorator';
import { MetricsService } from '../metrics/metrics.service';

/** Prometheus scrape endpoint. Public like the health routes: keep it off the internet at the network. */
@Controller()
export class MetricsController {
  constructor(private readonly metrics: MetricsService) {}

  @Get('metrics')
  @Public()
  @Header('content-type', 'text/plain; version=0.0.4; charset=utf-8')
  scrape(): Promise<string> {
    return this.metrics.registry.metrics();
  }
}
