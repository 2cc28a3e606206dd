// Placeholder until the client facade lands (replaced in the same session).
int main() { return 0; }
