import { Body, Controller, Delete, Get, Param, Patch, Post } from '@nestjs/common';
import { AdminKeysService, PrismaService, sqlOf } from '@app/common';
import type { AuditActor } from '@app/common';
import { AdminOnly } from '../../auth/access.decorator';
import { AdminActor } from '../../auth/admin-actor';
import { parseInput } from '../../common/validation';
import { ApiRoute } from '../../openapi/api-route.decorator';
import { PARAM } from '../../openapi/components';
import { list } from '../list';
import {
  createKeyBody,
  keyBudget,
  keyBudgetBody,
  keyCreated,
  keyList,
  keyRevoked,
  keyRotated,
  rotateKeyBody,
} from './keys.schemas';

const KEY_ID = 'The key’s id';

/** An organization's API keys: created (the secret shown once), listed, rotated, revoked. */
@Controller('admin')
@AdminOnly()
export class AdminKeysController {
  private readonly keys: AdminKeysService;

  constructor(prisma: PrismaService) {
    this.keys = new AdminKeysService(sqlOf(prisma.pool));
  }

  @Get('orgs/:org/keys')
  @ApiRoute({
    summary: 'List an organization’s API keys',
    tag: 'Admin',
    params: { org: PARAM.org },
    ok: { description: 'The keys', json: keyList },
    errors: [400, 404],
  })
  async listKeys(@Param('org') org: string) {
    return list(await this.keys.list(org));
  }

  @Post('orgs/:org/keys')
  @ApiRoute({
    summary: 'Create an API key',
    tag: 'Admin',
    params: { org: PARAM.org },
    body: { schema: createKeyBody, required: false },
    ok: { description: 'Created', json: keyCreated },
    errors: [400, 404],
  })
  createKey(@Param('org') org: string, @Body() body: unknown, @AdminActor() actor: AuditActor) {
    const input = parseInput(createKeyBody, body ?? {});
    return this.keys.as(actor).create({ org, label: input.label, expiresIn: input.expires_in });
  }

  @Delete('keys/:id')
  @ApiRoute({
    summary: 'Revoke an API key',
    tag: 'Admin',
    params: { id: KEY_ID },
    ok: { description: 'Revoked', json: keyRevoked },
    errors: [404],
  })
  revokeKey(@Param('id') id: string, @AdminActor() actor: AuditActor) {
    return this.keys.as(actor).revoke(id);
  }

  /** A key's own monthly token budget, within its org's (null removes it). */
  @Patch('keys/:id')
  @ApiRoute({
    summary: 'Set an API key’s monthly token budget',
    tag: 'Admin',
    params: { id: KEY_ID },
    body: { schema: keyBudgetBody, required: true },
    ok: { description: 'The key', json: keyBudget },
    errors: [400, 404],
  })
  setBudget(@Param('id') id: string, @Body() body: unknown, @AdminActor() actor: AuditActor) {
    return this.keys.as(actor).setBudget(id, parseInput(keyBudgetBody, body ?? {}).monthly_token_budget);
  }

  /** A new key for the same org and label; the old one keeps working for the grace (default 24h). */
  @Post('keys/:id/rotate')
  @ApiRoute({
    summary: 'Rotate an API key',
    tag: 'Admin',
    params: { id: KEY_ID },
    body: { schema: rotateKeyBody, required: false },
    ok: { description: 'The new key', json: keyRotated },
    errors: [400, 404, 409],
  })
  rotateKey(@Param('id') id: string, @Body() body: unknown, @AdminActor() actor: AuditActor) {
    return this.keys.as(actor).rotate(id, parseInput(rotateKeyBody, body ?? {}));
  }
}
