import { Injectable } from '@nestjs/common';
import { PassportStrategy } from '@nestjs/passport';
import { Strategy } from 'passport-http-bearer';
import { ApiKeyService } from './api-key.service';
import type { AuthContext } from './auth-context';

/** `Authorization: Bearer <key>`, through passport-http-bearer. */
@Injectable()
export class BearerStrategy extends PassportStrategy(Strategy, 'bearer') {
  constructor(private readonly keys: ApiKeyService) {
    super();
  }

  validate(token: string): Promise<AuthContext> {
    return this.keys.authenticate(token);
  }
}
