// Vite's `?raw` import of a text fixture (test/fixtures/): the file's text.
declare module "*.json?raw" {
  const text: string;
  export default text;
}
