-- A catalog model's kind: what it answers, `chat` (the chat routes) or `embedding` (the embeddings routes, issue 38).
-- A chat request naming an embedding model is refused with `not_a_chat_model`. Every model already in the catalog
-- was served by the chat routes, so it becomes `chat`, as do new models unless the admin says otherwise.
-- CreateEnum
CREATE TYPE "model_kind" AS ENUM ('chat', 'embedding');

-- AlterTable
ALTER TABLE "models" ADD COLUMN     "kind" "model_kind" NOT NULL DEFAULT 'chat';
