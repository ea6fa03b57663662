import { createHash, timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Body, Controller, Delete, Get, HttpCode, Inject, Param, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { APP_CONFIG, AppError } from '@app/common';
import type { AppConfig } from '@app/common';
import { Public } from '../auth/access.decorator';
import { AdminSessions } from '../auth/admin-sessions.service';
import { AuthFailures } from '../auth/auth-failures.service';
import { BodyLimit } from '../common/route-body';
import { parseInput } from '../common/validation';
import { ApiRoute } from '../openapi/api-route.decorator';
import { dashboardSession, signInBody } from './dashboard.schemas';

/**
 * The sign-in's own body limit: `{"token": "…"}` with the longest token the schema takes (1024
 * characters) is about 1 KiB. Anyone may post here, so nobody gets to make the api read and parse
 * more than that (the api's BODY_LIMIT_BYTES is sized for prompts).
 */
export const SIGN_IN_BODY_LIMIT_BYTES = 4 * 1024;

/**
 * Where `npm run build` (and the e2e setup) writes the dashboard's bundle: `dashboard/` beside `apps/`
 * in the build (dist/dashboard, or a test build's own).
 */
const ASSETS_DIR = join(__dirname, '..', '..', '..', '..', 'dashboard');

const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.html': 'text/html; charset=utf-8',
};

/** The page and its assets, read once: a handful of small files. */
function loadAssets(): Map<string, Buffer> {
  const files = new Map<string, Buffer>();
  if (existsSync(ASSETS_DIR)) {
    for (const name of readdirSync(ASSETS_DIR)) {
      if (/^[a-z0-9.-]+\.(js|css|html)$/.test(name)) {
        files.set(name, readFileSync(join(ASSETS_DIR, name)));
      }
    }
  }
  return files;
}

/**
 * Nothing but this origin's own scripts and styles; no framing (clickjacking an admin action), no
 * form posts elsewhere. The page talks only to this api.
 */
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
  "base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const NOT_BUILT =
  '<!doctype html><title>Switchyard</title><p>The dashboard is not built: run <code>npm run build</code>.</p>';

/**
 * The operators' dashboard (issue 19): one page and its bundle, served by the api itself, and the
 * sign-in that trades ADMIN_TOKEN for a session cookie. Its data comes from the admin API, which
 * accepts the session (auth.hook.ts). With ADMIN_PORT set it is served on the admin listener only.
 */
@Controller('dashboard')
@Public()
export class DashboardController {
  private readonly assets = loadAssets();
  private readonly adminDigest: Buffer | null;

  constructor(
    @Inject(APP_CONFIG) config: AppConfig,
    private readonly sessions: AdminSessions,
    private readonly failures: AuthFailures,
  ) {
    this.adminDigest = config.ADMIN_TOKEN ? createHash('sha256').update(config.ADMIN_TOKEN).digest() : null;
  }

  @Get()
  @ApiRoute({
    summary: 'The operators’ dashboard (a web page)',
    tag: 'Dashboard',
    ok: { description: 'The page', other: { 'text/html': 'The dashboard' } },
  })
  page(@Res() reply: FastifyReply) {
    this.send(reply, 'index.html', this.assets.get('index.html') ?? Buffer.from(NOT_BUILT));
  }

  @Get('assets/:file')
  @ApiRoute({
    summary: 'A script or stylesheet of the dashboard',
    tag: 'Dashboard',
    params: { file: 'The asset’s file name' },
    ok: { description: 'The asset', other: { 'text/javascript': 'A script', 'text/css': 'A stylesheet' } },
    errors: [404],
  })
  asset(@Param('file') file: string, @Res() reply: FastifyReply) {
    const body = file === 'index.html' ? undefined : this.assets.get(file);
    if (!body) {
      throw new AppError('unknown_url', 'Unknown request URL. Please check the URL and method.');
    }
    this.send(reply, file, body);
  }

  /** Signs in: the admin token for a session cookie (HttpOnly, SameSite=Strict, 12 h). */
  @Post('session')
  @HttpCode(204)
  @BodyLimit(SIGN_IN_BODY_LIMIT_BYTES)
  @ApiRoute({
    summary: 'Sign in to the dashboard: the admin token for a session cookie',
    tag: 'Dashboard',
    body: { schema: signInBody, required: true },
    ok: { description: 'Signed in: Set-Cookie sy_admin_session (HttpOnly, SameSite=Strict, 12 h)' },
    // 413: a body over the sign-in's own limit (SIGN_IN_BODY_LIMIT_BYTES).
    errors: [400, 401, 413, 429],
  })
  async signIn(@Body() body: unknown, @Req() request: FastifyRequest, @Res({ passthrough: true }) reply: FastifyReply) {
    // An address over the failed-auth limit is refused before its token is compared, as on the admin API.
    const blocked = this.failures.blocked('admin', request.ip);
    if (blocked) {
      throw blocked;
    }
    const { token } = parseInput(signInBody, body ?? {});
    const digest = createHash('sha256').update(token).digest();
    if (!this.adminDigest || !timingSafeEqual(digest, this.adminDigest)) {
      // Counted like a wrong bearer token: guessing through the form is limited the same way.
      throw (
        (await this.failures.failed('admin', request.ip)) ?? new AppError('invalid_admin_token', 'Wrong admin token.')
      );
    }
    await this.sessions.open(request, reply);
  }

  /** Whether the browser's cookie is a live session (the page asks before showing the sign-in form). */
  @Get('session')
  @ApiRoute({
    summary: 'Whether the browser is signed in to the dashboard',
    tag: 'Dashboard',
    ok: { description: 'The session state', json: dashboardSession },
  })
  async session(@Req() request: FastifyRequest) {
    return { signed_in: await this.sessions.valid(request) };
  }

  /** Signs out: the session ends on every api instance. */
  @Delete('session')
  @HttpCode(204)
  @ApiRoute({
    summary: 'Sign out of the dashboard',
    tag: 'Dashboard',
    ok: { description: 'Signed out: the session ends on every api instance' },
  })
  async signOut(@Req() request: FastifyRequest, @Res({ passthrough: true }) reply: FastifyReply) {
    await this.sessions.close(request, reply);
  }

  private send(reply: FastifyReply, file: string, body: Buffer): void {
    void reply
      .header('content-type', TYPES[file.slice(file.lastIndexOf('.'))] ?? 'application/octet-stream')
      .header('content-security-policy', CSP)
      .header('x-content-type-options', 'nosniff')
      .header('cache-control', 'no-store')
      .send(body);
  }
}
