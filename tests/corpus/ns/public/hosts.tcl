set h1 [$ns node]
set h2 [$ns node]
