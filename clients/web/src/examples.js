// Requests to start from: a few genres, short enough to render quickly.
export const EXAMPLES = [
  {
    name: "Lo-fi study beat",
    request: {
      style: "lo-fi hip hop, mellow piano, vinyl crackle, 80 bpm",
      lyrics: "[verse]\nRain on the window, tea going cold\nPages of stories I never told\n\n[chorus]\nSlow down, slow down, let the evening stay\n",
      cot: "off",
      duration: 20,
    },
  },
  {
    name: "Folk ballad with a written score",
    request: {
      style: "acoustic folk, fingerpicked guitar, warm male vocal",
      lyrics: "[verse]\nDown by the river the willows lean low\nCarrying secrets the old waters know\n",
      abc: "X:1\nT:River\nM:3/4\nL:1/8\nK:G\nV:1\n|: G2 B2 d2 | e2 d2 B2 | A2 B2 G2 | D6 :|\n",
      cot: "full",
      duration: 30,
    },
  },
  {
    name: "Synthwave drive",
    request: {
      style: "synthwave, retro analog synths, gated drums, 110 bpm, female vocal",
      lyrics: "[verse]\nNeon on the highway, chrome against the night\n[chorus]\nWe are running, running into the light\n",
      cot: "melody",
      duration: 45,
    },
  },
  {
    name: "Punk rock blast",
    request: {
      style: "punk rock, distorted guitars, fast drums, shouted vocals, 180 bpm",
      lyrics: "[verse]\nNo more waiting, no more lines\n[chorus]\nTurn it up, turn it up, one more time\n",
      cot: "off",
      duration: 25,
    },
  },
];

// MiniMax Music 3 requests: a Structured Caption (a "Global Metadata" block of <|tag value|>
// lines, then the description in prose) and lyrics with their [section] tags. Short, so a
// first render is quick.
export const MM3_EXAMPLES = [
  {
    name: "Synth-pop anthem",
    request: {
      caption: "Global Metadata\n<|bpm 120|>\n<|key C major|>\n<|genre synth-pop|>\nUpbeat synth-pop with bright female vocals, punchy drums and shimmering analog pads",
      lyrics: "[verse]\nCity lights are calling out my name\nEvery street is dancing in the rain\n\n[chorus]\nWe glow, we glow, we never fade away\nTurn it up and let the night be day\n",
      duration: 30,
    },
  },
  {
    name: "Melancholic piano ballad",
    request: {
      caption: "Global Metadata\n<|bpm 72|>\n<|key A minor|>\n<|mood melancholic|>\nIntimate piano ballad, soft male vocal, cello swelling in the chorus",
      lyrics: "[verse]\nLetters in a drawer I never sent\nEvery word a bridge of what we meant\n\n[chorus]\nStay a little longer in the light\nBefore the evening takes you out of sight\n",
      duration: 40,
    },
  },
  {
    name: "Driving techno (instrumental)",
    request: {
      caption: "Global Metadata\n<|bpm 128|>\n<|key C minor|>\nA driving techno track, rolling bassline, crisp hi-hats, hypnotic arpeggios",
      lyrics: "[intro]\n\n[instrumental]\n\n[outro]\n",
      duration: 30,
    },
  },
];
