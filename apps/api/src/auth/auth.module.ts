import { Module } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { KeyUsageService } from '../keys/key-usage.service';
import { AdminSessions } from './admin-sessions.service';
import { ApiKeyService } from './api-key.service';
import { AuthFailures } from './auth-failures.service';
import { AuthGuard } from './auth.guard';

/** Credentials: API keys, the admin token, failed attempts; the global guard. See auth.hook.ts. */
@Module({
  providers: [AdminSessions, ApiKeyService, KeyUsageService, AuthFailures, { provide: APP_GUARD, useClass: AuthGuard }],
  exports: [AdminSessions, ApiKeyService, AuthFailures],
})
export class AuthModule {}
