import { Body, Controller, Delete, Get, Param, Post } from '@nestjs/common';
import { AdminKeysService, PrismaService, sqlOf } from '@app/common';
import { AdminOnly } from '../../auth/access.decorator';
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
  createKey(@Param('org') org: string, @Body() body: unknown) {
    const input = parseInput(createKeyBody, body ?? {});
    return this.keys.create({ org, label: input.label, expiresIn: input.expires_in });
  }

  @Delete('keys/:id')
  @ApiRoute({
    summary: 'Revoke an API key',
    tag: 'Admin',
    params: { id: KEY_ID },
    ok: { description: 'Revoked', json: keyRevoked },
    errors: [404],
  })
  revokeKey(@Param('id') id: string) {
    return this.keys.revoke(id);
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
  rotateKey(@Param('id') id: string, @Body() body: unknown) {
    return this.keys.rotate(id, parseInput(rotateKeyBody, body ?? {}));
  }
}
