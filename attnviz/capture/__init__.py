"""How one forward hands over what it saw: the recorder, norm hooks, head masks, transformers' attention function."""
