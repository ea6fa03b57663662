import { Controller, Get, Header } from '@nestjs/common';
import { DispatcherMetrics } from './dispatcher-metrics.service';

@Controller()
export class MetricsController {
  constructor(private readonly metrics: DispatcherMetrics) {}

  @Get('metrics')
  @Header('content-type', 'text/plain; version=0.0.4; charset=utf-8')
  scrape(): Promise<string> {
    return this.metrics.registry.metrics();
  }
}
