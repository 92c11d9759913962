// The copy-and-paste examples on the overview: curl and the openai SDKs, against this service.

export interface Snippet {
  id: string;
  label: string;
  code: string;
}

export function snippets(baseUrl: string, model: string): Snippet[] {
  return [
    {
      id: 'curl',
      label: 'curl',
      code: `curl ${baseUrl}/chat/completions \\
  -H "Authorization: Bearer $SVC_API_KEY" \\
  -H "Content-Type: application/json" \\
  -d '{"model": "${model}", "messages": [{"role": "user", "content": "Hello"}]}'`,
    },
    {
      id: 'python',
      label: 'Python (openai)',
      code: `from openai import OpenAI
import os

client = OpenAI(base_url="${baseUrl}", api_key=os.environ["SVC_API_KEY"])
answer = client.chat.completions.create(
    model="${model}",
    messages=[{"role": "user", "content": "Hello"}],
)
print(answer.choices[0].message.content)`,
    },
    {
      id: 'js',
      label: 'JavaScript (openai)',
      code: `import OpenAI from 'openai';

const client = new OpenAI({ baseURL: '${baseUrl}', apiKey: process.env.SVC_API_KEY });
const answer = await client.chat.completions.create({
  model: '${model}',
  messages: [{ role: 'user', content: 'Hello' }],
});
console.log(answer.choices[0].message.content);`,
    },
  ];
}
