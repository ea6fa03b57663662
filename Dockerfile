FROM node:20-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN node scripts/build.mjs
# The processes need nothing a root user has: they run as the image's unprivileged `node` user, and
# the files they run stay root's (read-only to them).
USER node
ENV HOST=0.0.0.0
EXPOSE 8080 8081
