import { defineConfig } from 'prisma/config';

// Only `prisma generate` runs here: migrations are applied by `npm run db:migrate` (see README).
export default defineConfig({
  schema: 'prisma/schema.prisma',
  migrations: { path: 'prisma/migrations' },
  datasource: { url: process.env.DATABASE_URL ?? 'postgresql://postgres@127.0.0.1:5432/switchyard' },
});
