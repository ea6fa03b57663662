import { Global, Module } from '@nestjs/common';
import { RedisBatch } from './redis-batch';

/**
 * What the dispatcher's modules use beyond the core (dispatcher-core.ts): the batch of background
 * writes on the command connection.
 */
@Global()
@Module({ providers: [RedisBatch], exports: [RedisBatch] })
export class InfraModule {}
