// Refuses a document of the kit that selects a deprecated field (or passes a deprecated
// argument or enum value): a deprecated field is one the service will drop, and the
// kit is the example of how a client reads engage. Run by `npm run codegen` before it
// generates, so CI's codegen step fails on one. (Codegen validates the documents against
// the schema, but does not refuse deprecated fields.)
import { readFileSync } from 'node:fs';
import { buildSchema, NoDeprecatedCustomRule, parse, Source, validate } from 'graphql';

const schemaPath = '../../schema.graphql';
const documentsPath = 'src/operations.graphql';

const schema = buildSchema(readFileSync(schemaPath, 'utf8'));
const documents = parse(new Source(readFileSync(documentsPath, 'utf8'), documentsPath));
const errors = validate(schema, documents, [NoDeprecatedCustomRule]);
for (const error of errors) {
  const [where] = error.locations ?? [];
  console.error(`${documentsPath}${where ? `:${where.line}:${where.column}` : ''}: ${error.message}`);
}
if (errors.length) process.exit(1);
